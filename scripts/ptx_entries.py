#!/usr/bin/python3
"""Print the bodies of a PTX file's kernels whose mangled names contain every given substring, with
the kernel's own name, its function-local shared variables' names and .loc lines normalised, so
that two builds of a kernel can be diffed: an unchanged body means unchanged SASS (ptxas is
deterministic), whatever template parameters or trailing kernel parameters were added around it.

  nvcc -O2 -std=c++17 -I. -arch=compute_90 -ptx cuda/cuda_decode_attention.cu -o new.ptx   (and old.ptx
  from the previous commit's tree, e.g. git archive REV cuda base engine model | tar -x -C old)
  diff <(scripts/ptx_entries.py old.ptx 'decode_attention_kernelILi128ELi2ELi4ELb1EEv' | sed 1d) \
       <(scripts/ptx_entries.py new.ptx 'decode_attention_kernelILi128ELi2ELi4ELb1EtLi8EEv' | sed 1d)
"""
import re
import sys


def main():
    path, subs = sys.argv[1], sys.argv[2:]
    text = open(path).read()
    for m in re.finditer(r"\.visible \.entry (\S+)\(", text):
        name = m.group(1)
        if not all(s in name for s in subs):
            continue
        start = text.index("{", m.end())  # the body: from its brace to the matching one
        depth, i = 0, start
        while True:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        body = text[start:i + 1].replace(name, "ENTRY")
        body = re.sub(r"\.loc\s.*\n", "", body)
        body = re.sub(r"_ZZ\d+\w*?E(\d+)([A-Za-z_]\w*)", lambda v: "LOCAL_" + v.group(2)[:int(v.group(1))], body)
        print("//", name)
        print(body)


if __name__ == "__main__":
    main()
