// torchtop's window into libtorch's CUDA caching allocator, for Rust programs built on tch.
//
// tch has no API for the allocator's counters, so this shim reads them through c10's generic
// DeviceAllocator interface: only c10 headers, no CUDA headers, and no CUDA call of its own, so it
// can never create a CUDA context. Every entry point catches all exceptions: the agent must never
// take its host program down.

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceType.h>
#include <torch/version.h>

#include <cstdint>
#include <cstring>

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

// The CUDA allocator, or null when libtorch has none (a CPU build, or libc10_cuda not loaded).
c10::DeviceAllocator* cuda_allocator() {
  try {
    c10::Allocator* any = c10::GetAllocator(c10::DeviceType::CUDA);
    return dynamic_cast<c10::DeviceAllocator*>(any);
  } catch (...) {
    return nullptr;
  }
}

// The CUDA allocator once the program has initialized CUDA; null before.
c10::DeviceAllocator* initialized_cuda_allocator() {
  c10::DeviceAllocator* allocator = cuda_allocator();
  if (allocator == nullptr) {
    return nullptr;
  }
  try {
    return allocator->initialized() ? allocator : nullptr;
  } catch (...) {
    return nullptr;
  }
}

void copy_stat(const Stat& from, int64_t* to) {
  to[0] = from.current;
  to[1] = from.peak;
  to[2] = from.allocated;
  to[3] = from.freed;
}

// StatArray order is all, small_pool, large_pool; each stat is current, peak, allocated, freed.
void copy_stat_array(const StatArray& from, int64_t* to) {
  for (size_t pool = 0; pool < 3; ++pool) {
    copy_stat(from[pool], to + pool * 4);
  }
}

}  // namespace

extern "C" {

// Keep in step with `ShimDeviceStats` in src/tch_agent/libtorch.rs.
struct torchtop_device_stats {
  int64_t allocation[12];
  int64_t segment[12];
  int64_t active[12];
  int64_t inactive_split[12];
  int64_t allocated_bytes[12];
  int64_t reserved_bytes[12];
  int64_t active_bytes[12];
  int64_t inactive_split_bytes[12];
  int64_t requested_bytes[12];
  int64_t oversize_allocations[4];
  int64_t oversize_segments[4];
  int64_t num_alloc_retries;
  int64_t num_ooms;
  int64_t num_sync_all_streams;
  int64_t num_device_alloc;
  int64_t num_device_free;
  int64_t max_split_size;
};

// The libtorch version these headers belong to, such as "2.11.0".
const char* torchtop_torch_version() { return TORCH_VERSION; }

// How many devices the CUDA allocator knows: 0 before the program initialized CUDA.
int32_t torchtop_cuda_device_count() {
  c10::DeviceAllocator* allocator = initialized_cuda_allocator();
  if (allocator == nullptr) {
    return 0;
  }
  // The allocator is sized to the device count at CUDA init and refuses indices past it.
  int32_t count = 0;
  for (; count < 1024; ++count) {
    try {
      (void)allocator->getDeviceStats(static_cast<c10::DeviceIndex>(count));
    } catch (...) {
      break;
    }
  }
  return count;
}

// Fills `out` for `device`. Returns 0 on success, -1 when there is no such initialized device.
int32_t torchtop_cuda_device_stats(int32_t device, torchtop_device_stats* out) {
  c10::DeviceAllocator* allocator = initialized_cuda_allocator();
  if (allocator == nullptr || out == nullptr || device < 0) {
    return -1;
  }
  try {
    const DeviceStats stats = allocator->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    std::memset(out, 0, sizeof(*out));
    copy_stat_array(stats.allocation, out->allocation);
    copy_stat_array(stats.segment, out->segment);
    copy_stat_array(stats.active, out->active);
    copy_stat_array(stats.inactive_split, out->inactive_split);
    copy_stat_array(stats.allocated_bytes, out->allocated_bytes);
    copy_stat_array(stats.reserved_bytes, out->reserved_bytes);
    copy_stat_array(stats.active_bytes, out->active_bytes);
    copy_stat_array(stats.inactive_split_bytes, out->inactive_split_bytes);
    copy_stat_array(stats.requested_bytes, out->requested_bytes);
    copy_stat(stats.oversize_allocations, out->oversize_allocations);
    copy_stat(stats.oversize_segments, out->oversize_segments);
    out->num_alloc_retries = stats.num_alloc_retries;
    out->num_ooms = stats.num_ooms;
    out->num_sync_all_streams = stats.num_sync_all_streams;
    out->num_device_alloc = stats.num_device_alloc;
    out->num_device_free = stats.num_device_free;
    out->max_split_size = stats.max_split_size;
    return 0;
  } catch (...) {
    return -1;
  }
}

// Resets the peak counters of `device`. Returns 0 on success, -1 otherwise.
int32_t torchtop_cuda_reset_peak(int32_t device) {
  c10::DeviceAllocator* allocator = initialized_cuda_allocator();
  if (allocator == nullptr || device < 0) {
    return -1;
  }
  try {
    allocator->resetPeakStats(static_cast<c10::DeviceIndex>(device));
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
