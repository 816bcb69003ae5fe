from tests.torch_run import config, run_dir

__all__ = ["config", "run_dir"]
