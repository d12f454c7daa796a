"""tf32: the same fp32 training as fp32_no_tc.py but with TF32 allowed.

torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True.
The GEMMs run on Tensor Cores (TF32). Expected: TA005 must not fire.

usage: python3 tf32.py OUT.json.gz
"""

import common as C

if __name__ == "__main__":
    C.run_fp32("tf32", C.out_arg("tf32.json.gz"), tf32=True)
