// Bug: every thread adds into one shared total without atomics (a shared-memory race).
extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float total;
    int r = blockIdx.x;
    int t = threadIdx.x;
    float acc = 0.f;
    for (int c = t; c < cols; c += blockDim.x) acc += x[(size_t)r * cols + c];
    if (t == 0) total = 0.f;
    __syncthreads();
    total += acc;
    __syncthreads();
    if (t == 0) y[r] = total;
}
