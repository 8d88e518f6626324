#!/usr/bin/env bash
# Device probe: versions, tool outputs for parser fixtures, compile-path timings.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p $O
{
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
nvcc --version | tail -1; ncu --version | tail -1; compute-sanitizer --version | tail -1
python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,torch.cuda.get_device_name(0))"
python3 -c "import cupy;print('cupy',cupy.__version__)"
python3 -c "import cuda.bindings;print('cuda.bindings',cuda.bindings.__version__)" 2>&1 | tail -1
python3 -c "import cuda.core;print('cuda.core ok')" 2>&1 | tail -1
python3 -c "import triton;print('triton',triton.__version__)"
which c++filt cu++filt
} > $O/versions.txt 2>&1
cat $O/versions.txt
nvcc -arch=sm_90 -lineinfo -o /tmp/kern kernels.cu 2>&1
compute-sanitizer --tool memcheck /tmp/kern > $O/sanitizer_memcheck.txt 2>&1; echo "memcheck rc=$?" >> $O/sanitizer_memcheck.txt
compute-sanitizer --tool racecheck /tmp/kern > $O/sanitizer_racecheck.txt 2>&1; echo "racecheck rc=$?" >> $O/sanitizer_racecheck.txt
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SpeedOfLight_RooflineChart"
timeout 300 ncu $SECS --kernel-name regex:fused_gelu --launch-count 1 --csv --page details --print-units base --print-details all python3 torch_prog.py > $O/ncu_details.csv 2>&1; echo "rc=$?" >> $O/ncu_details.csv
timeout 300 ncu $SECS --kernel-name regex:fused_gelu --launch-count 1 -o /tmp/prof python3 torch_prog.py > /dev/null 2>&1
ncu --import /tmp/prof.ncu-rep --page raw --csv --print-units base > $O/ncu_raw.csv 2>&1
ncu --import /tmp/prof.ncu-rep --print-details all --print-rule-details > $O/ncu_text.txt 2>&1
cp /tmp/prof.ncu-rep $O/prof.ncu-rep
python3 - <<'PY' > $O/timings.txt 2>&1
import time, torch
t=time.time(); import cupy; t1=time.time()
src='extern "C" __global__ void k(float* x,int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i]*=2.f;}'
for j in range(3):
    t=time.time(); m=cupy.RawModule(code=src.replace("2.f",f"{j+2}.f")); m.get_function("k"); print("nvrtc cupy compile", j, round(time.time()-t,3))
try:
    from cuda.bindings import nvrtc
    t=time.time(); e,p=nvrtc.nvrtcCreateProgram(src.encode(),b"k.cu",0,[],[]); r=nvrtc.nvrtcCompileProgram(p,1,[b"--gpu-architecture=sm_90"]); print("nvrtc cuda.bindings compile", r[0], round(time.time()-t,3))
except Exception as ex: print("cuda.bindings", ex)
import inspect
for j in range(3):
    t=time.time(); kk=torch.cuda._compile_kernel(src.replace("2.f",f"{j+7}.f"), "k"); print("torch._compile_kernel", j, round(time.time()-t,3))
print(inspect.signature(torch.cuda._compile_kernel)); print([a for a in dir(kk) if not a.startswith('__')])
z=torch.ones(1000,device="cuda"); kk(grid=(4,1,1), block=(256,1,1), args=[z, 1000]); torch.cuda.synchronize(); print("compile_kernel ran", z[:3].tolist())
x=torch.empty(1<<28, device="cuda"); y=torch.empty_like(x); torch.cuda.synchronize()
for _ in range(3): y.copy_(x)
s=torch.cuda.Event(True); e=torch.cuda.Event(True); s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize(); ms=s.elapsed_time(e)/20
print("copy GB/s", 2*x.numel()*4/ms/1e6)
from torch.utils.cpp_extension import load_inline
t=time.time()
mod=load_inline("probe_ext", cpp_sources="torch::Tensor twice(torch::Tensor x);", cuda_sources="""
#include <torch/extension.h>
__global__ void k(float* x,int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i]*=2.f;}
torch::Tensor twice(torch::Tensor x){auto y=x.clone(); int n=y.numel(); k<<<(n+255)/256,256>>>(y.data_ptr<float>(),n); return y;}
""", functions=["twice"], verbose=False)
print("load_inline", round(time.time()-t,2))
f=torch.compile(lambda a: torch.nn.functional.gelu(a)*2+1)
a=torch.randn(1024,1024,device="cuda"); t=time.time(); f(a); torch.cuda.synchronize(); print("torch.compile first", round(time.time()-t,2))
PY
cat $O/timings.txt
head -c 3000 $O/sanitizer_memcheck.txt; head -c 2000 $O/sanitizer_racecheck.txt; head -c 1500 $O/ncu_details.csv
