"""Parts shared by hvdrun.torch and hvdrun.numpy (as horovod.common is)."""
