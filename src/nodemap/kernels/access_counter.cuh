// nodemap access counter: count accesses per chunk in a profiling pre-pass.
//
// Include this in your own kernel (NVRTC or nvcc) and call
// nm_count_access(counts, byte_offset, chunk_shift) for every read of the
// data you want placed. counts is this GPU's array of unsigned long long, one
// per chunk (nodemap.placement.profiler.Profiler allocates it and gathers
// every GPU's array into a [chunks x GPUs] matrix for the planner).
//
// Contention is low: lanes of a warp that hit the same chunk are merged with
// __match_any_sync and one leader adds the whole group's count (a hot chunk
// costs one atomic per warp, not per thread).
#pragma once

__device__ __forceinline__ void nm_count_access(unsigned long long *counts,
                                                unsigned long long byte_offset,
                                                unsigned int chunk_shift) {
    unsigned long long chunk = byte_offset >> chunk_shift;
    unsigned int active = __activemask();
    unsigned int same = __match_any_sync(active, chunk);
    int leader = __ffs(same) - 1;
    if ((int)(threadIdx.x & 31) == leader) {
        atomicAdd(&counts[chunk], (unsigned long long)__popc(same));
    }
}

// 1-in-k sampling: count only when the caller's access index says so.
__device__ __forceinline__ bool nm_sampled(unsigned long long access_index,
                                           unsigned int sample_every) {
    return sample_every <= 1 || (access_index % sample_every) == 0;
}
