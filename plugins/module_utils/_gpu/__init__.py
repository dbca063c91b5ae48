"""GPUs: nvidia-smi parsing, GPU selection, the GPU code (CUDA fatbin) check."""
