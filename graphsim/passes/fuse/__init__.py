"""fuse: rewrite aten-level nodes into the kernels a target engine launches."""
