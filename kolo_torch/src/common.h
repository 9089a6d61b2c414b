// Helpers shared by kolo_torch's translation units (private).
#pragma once

#include <optional>
#include <string>

#include <c10/core/Stream.h>

#include "kolo/torch.h"

namespace kolo::torch::detail {

// "kolo rank R: " — every message names the rank it comes from.
std::string prefix(int rank);

// The kolo dtype of a tensor's scalar type; `what` names the tensor in the error.
DType kolo_dtype(c10::ScalarType t, const std::string& what, int rank);

// Where the tensor's memory is, as kolo's collectives take it: the host for a
// CPU tensor; for a CUDA tensor its device and LibTorch's current stream there,
// on which the collective is then ordered as a kernel would be. Throws for
// sparse tensors, other devices, and CUDA tensors of a LibTorch older than 2.2
// (whose streams kolo cannot name without CUDA headers).
Place place_of(const ::torch::Tensor& t, const std::string& what, int rank);

// LibTorch's current stream on a CUDA device.
c10::Stream current_stream(c10::Device cuda_device);
// ... on a CUDA tensor's device (the one place_of names); nullopt for a CPU tensor.
std::optional<c10::Stream> current_stream(const ::torch::Tensor& t);

// Work queued on `later` from now on waits for the work queued on `earlier`
// so far (a c10 event: no CUDA header); nothing where they are one stream.
void order(const c10::Stream& earlier, const c10::Stream& later);

// "[128, 9216] f32"
std::string describe(const ::torch::Tensor& t);

// Collective: every rank must hold the same names, shapes and dtypes. One
// allgather of a hash when they agree; otherwise every rank throws an error
// listing, per rank, how its tensors differ from root's. `what` names the caller.
void check_same_tensors(Communicator& comm, const NamedTensors& params,
                        const NamedTensors& buffers, int root, const std::string& what);

// Broadcasts the tensors from root in place (non-contiguous ones through a
// copy): all started at once, then waited for. Collective.
void broadcast_all(Communicator& comm, const NamedTensors& tensors, int root);

}  // namespace kolo::torch::detail
