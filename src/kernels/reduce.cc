// Placeholder: the Highway kernels land here.
