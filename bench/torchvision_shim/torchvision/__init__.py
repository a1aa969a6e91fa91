"""A stand-in for ``import torchvision`` where torchvision's compiled operators cannot load.

PyPI's torchvision 0.28.0 (the release for torch 2.13.0) is built against torch's CUDA wheel:
its _C.so needs libc10_cuda.so and libtorch_cuda.so, which torch 2.13.0+cpu does not ship, and
``import torchvision`` then fails registering its operators ("operator torchvision::nms does not
exist"). The models need none of them. This package takes torchvision's place on sys.path and
makes the installed torchvision's own subpackages (``torchvision.models`` ...) importable without
running its __init__, so ``from torchvision import models; models.resnet50()`` builds
torchvision's real ResNet-50. Used by bench/horovod_synthetic.py only.
"""

import pathlib
import sys

_installed = None
for entry in sys.path:
    candidate = pathlib.Path(entry or ".").resolve() / "torchvision"
    if (candidate / "models").is_dir() and candidate != pathlib.Path(__file__).resolve().parent:
        _installed = candidate
        break
if _installed is None:
    raise ImportError("torchvision is not installed: the stand-in serves its models from it")
__path__ = [str(_installed)]  # subpackages resolve into the installed torchvision
from torchvision.version import __version__  # noqa: E402,F401
