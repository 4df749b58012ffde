"""trtserve's version: the one place it is written. pyproject.toml reads it (setuptools' dynamic
`attr`, without importing the package), and so do `trtserve.__version__`, `trtserve --version`,
/openapi.json, the KServe server metadata, receipts and the manifests that builds write."""

VERSION = "0.1.0"
