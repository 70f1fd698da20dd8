"""The grid pillar's Python modules: batches of sparse voxel grids (batch.GridBatch,
single.Grid), JaggedTensor (jagged_tensor), their ops (sampling, sparse convolution, pooling,
rays, volume rendering, TSDF fusion, ...) and file readers and writers (nvdb_io: .nvdb;
mesh_io: PLY, OFF).

The public names are exported by tilegrid itself (tg.GridBatch, tg.JaggedTensor, tg.load, ...);
this package imports nothing on its own, so that its modules import each other without cycles.
"""
