#include <cuda_runtime.h>
// Two kernels with planted bugs for the sanitizer, one clean kernel for ncu.
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

__global__ void oob_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.0f;  // no bounds check: writes past n
}

__global__ void race_kernel(float* out) {
    __shared__ float s[256];
    s[threadIdx.x] = threadIdx.x;
    // missing __syncthreads()
    out[threadIdx.x] = s[(threadIdx.x + 1) % 256];
}

int main() {
    int n = 1 << 24;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    cudaMemset(x, 0, n * sizeof(float));
    scale_kernel<<<(n + 255) / 256, 256>>>(x, y, 2.0f, n);
    cudaDeviceSynchronize();
    oob_kernel<<<1, 256>>>(y + n - 100, 100);
    cudaDeviceSynchronize();
    race_kernel<<<1, 256>>>(y);
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : 1;
}
