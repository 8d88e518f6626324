// Bug: missing __syncthreads(). One block per row; a shared-memory tree reduction.
extern "C" __global__ void rowsum(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float s[256];
    int r = blockIdx.x;
    int t = threadIdx.x;
    float acc = 0.f;
    for (int c = t; c < cols; c += blockDim.x) acc += x[(size_t)r * cols + c];
    s[t] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        // bug: no __syncthreads() between the levels of the tree
    }
    if (t == 0) y[r] = s[0];
}
