"""Checkpoints make-model writes: the architecture catalogue (`architectures`) and the seeded
weights written for it as safetensors (`weights`)."""
