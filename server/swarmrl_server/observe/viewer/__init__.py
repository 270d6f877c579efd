"""The episode viewer: a few server-rendered pages over the trajectory store.

`swarmrl serve` mounts it on the HTTP shim at ``/view/``; `swarmrl view DATA_DIR`
serves it offline from a data dir.
"""
