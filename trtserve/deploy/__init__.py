"""Scale-out on existing orchestrators: Ray Serve replicas (ray.py, needs `trtserve[ray]`).

The Kubernetes side (KServe, KEDA, images) is plain files in the repository's deploy/ directory.
"""
