"""The one compiled part of Habitus: `habitus.crypto._envelope`, sealing and opening an event
body in one call each (libs/habitus/crypto/sealing.py says why). Everything else is in
pyproject.toml.

The extension is optional: where no C compiler or OpenSSL headers are found the build says so
and goes on, and the same code runs in Python (the same bodies open, refuse or fall back;
tests/unit/test_crypto_native.py holds both paths to that).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("habitus.crypto._envelope", ["libs/habitus/crypto/_envelope.c"],
              libraries=["crypto"], optional=True,
              extra_compile_args=["-O2", "-D_GNU_SOURCE"]),
])
