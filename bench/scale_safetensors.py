#!/usr/bin/env python3
"""Scales a BF16 safetensors file's embedding and head by 6 and its attention / DeltaNet output
projections by 3, in place: a random model's next-token distribution then departs from uniform
(perplexity about 800 on a vocabulary of 512 instead of about 512), so that two engines that read
the weights differently give visibly different perplexities.

    python3 bench/scale_safetensors.py DIR/model.safetensors
"""
import json, struct, sys, numpy as np
p=sys.argv[1]
b=bytearray(open(p,'rb').read())
n=struct.unpack_from('<Q',b,0)[0]
h=json.loads(b[8:8+n]); base=8+n
for name,info in h.items():
    if name=='__metadata__' or info['dtype']!='BF16': continue
    if name.endswith('embed_tokens.weight') or name.endswith('lm_head.weight') or 'o_proj' in name or 'out_proj' in name:
        s,e=info['data_offsets']
        a=np.frombuffer(bytes(b[base+s:base+e]),dtype='<u2').astype(np.uint32)<<16
        f=a.view(np.float32)*(6.0 if 'embed' in name or 'lm_head' in name else 3.0)
        b[base+s:base+e]=(f.view(np.uint32)>>16).astype('<u2').tobytes()
open(p,'wb').write(b)
