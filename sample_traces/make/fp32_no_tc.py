"""fp32_no_tc: the GPT model trained in plain fp32 with TF32 off.

torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False, no
autocast; 2 warm-up steps, then schedule(wait=1, warmup=2, active=4). The GEMMs run as FP32
SIMT kernels. Expected: TA005 no-tensor-cores on top.

usage: python3 fp32_no_tc.py OUT.json.gz
"""

import common as C

if __name__ == "__main__":
    C.run_fp32("fp32_no_tc", C.out_arg("fp32_no_tc.json.gz"), tf32=False)
