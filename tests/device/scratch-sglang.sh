# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Sourced by the device scripts that run sglang outside Ansible (run-ddtree, run-readiness-real):
# sglang 0.5.17 and its dependencies from the carried GPU bundle (.device/carry/gpu-bundle.tar.xz,
# scripts/gpu-bundle) installed --no-deps into a scratch site on top of the machine's torch venv,
# and the environment to run it. The site comes first on PYTHONPATH, so its transformers (sglang's pin,
# 5.12.1) and tokenizers stand in front of the machine's newer ones, as the release venv's do on a host;
# nothing else changes how Python runs. Expects $out (a results directory); sets $py and $site.
py=${SPECDEC_TORCH_PYTHON:-/opt/torch/.venv/bin/python}
site=/tmp/specdec-ddtree/site
scratch_wh=/tmp/specdec-ddtree/bundle
scratch_start=$SECONDS
if [ ! -f "$site/sglang/__init__.py" ]; then
  mkdir -p "$scratch_wh" "$site"
  tar -xJf "${SPECDEC_GPU_BUNDLE:-.device/carry/gpu-bundle.tar.xz}" -C "$scratch_wh" || exit 3
  "$py" -m pip install -q --no-deps --no-index --no-compile --target "$site" "$scratch_wh"/wheelhouse/*.whl \
    >"$out/pip.log" 2>&1 || { tail -20 "$out/pip.log"; exit 3; }
fi
echo "install $((SECONDS - scratch_start))s" | tee "$out/timings.txt"
torch_site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
cudart=/tmp/specdec-ddtree/cudart; mkdir -p "$cudart"
lib=$(ls /usr/local/cuda/lib64/libcudart.so.13* "$torch_site"/nvidia/cu13/lib/libcudart.so.13* 2>/dev/null | head -1)
[ -n "$lib" ] && ln -sf "$lib" "$cudart/libcudart.so"
export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=$site
export LIBRARY_PATH=$cudart:${LIBRARY_PATH:-} LD_LIBRARY_PATH=$torch_site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv >"$out/nvidia-smi.csv" 2>&1
"$py" -c 'import torch, sglang, sgl_kernel; print("torch", torch.__version__, "sgl_kernel", sgl_kernel.__version__)' \
  >"$out/versions.txt" 2>&1
