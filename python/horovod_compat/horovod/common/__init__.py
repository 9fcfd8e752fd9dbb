"""horovod.common, served by hvdrun.common."""
