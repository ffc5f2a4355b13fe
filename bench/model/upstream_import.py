"""Loads upstream's own taehv.py (madebyollin/taehv, MIT) from a path the user gives: nothing of it is in this
repository. Get it with `git clone https://github.com/madebyollin/taehv` (the file is taehv.py at its root).
Upstream imports tqdm for its progress bars; when the Python has no tqdm, a silent stand-in is installed first."""
import importlib.machinery
import importlib.util
import sys
import types


def _install_tqdm_stand_in():
    stub = types.ModuleType("tqdm")
    # torch._dynamo looks modules up with importlib.util.find_spec, which needs a spec on every module it finds.
    stub.__spec__ = importlib.machinery.ModuleSpec("tqdm", None)

    class Bar:
        def __init__(self, iterable=None, **kwargs):
            self.iterable = iterable

        def __iter__(self):
            return iter(self.iterable)

        def update(self, n=1):
            pass

        def close(self):
            pass

    stub.tqdm = Bar
    sys.modules.setdefault("tqdm", stub)
    sys.modules.setdefault("tqdm.auto", stub)


def load_upstream(path):
    """The module at `path` (upstream taehv.py): its TAEHV class builds the model (checkpoint_path=None: random
    weights)."""
    try:
        import tqdm.auto  # noqa: F401
    except ImportError:
        _install_tqdm_stand_in()
    spec = importlib.util.spec_from_file_location("upstream_taehv", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile (dynamo) imports the module of the code it traces by name
    spec.loader.exec_module(module)
    return module
