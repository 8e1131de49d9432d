"""nkmpi's files, one module per format: `dataset` (dataset v1, the input), `result`
(result v1, a run's output) and `checkpoint` (a run's state, to resume it); `hdf5` holds
what they share: headers, temporary names, atomic and per-rank sliced writing."""
