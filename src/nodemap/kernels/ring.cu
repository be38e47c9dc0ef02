// Kernels of `nodemap bench ring`, compiled at run time by NVRTC through CuPy.
//
//   compute  stands in for a stencil's interior update: `reps` dependent
//            FMAs per element, so its duration is set by `reps` and it can
//            be tuned to last as long as the halo exchange. One block per
//            SM leaves room on every SM for NCCL's kernels to run beside it.

extern "C" __global__ void compute(float *__restrict__ a, long long n, int reps) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = a[i];
        for (int r = 0; r < reps; ++r) x = fmaf(x, 0.999999f, 1e-7f);
        a[i] = x;
    }
}
