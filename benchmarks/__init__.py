"""Speed benchmarks: mains that time the models, the decoder, training steps and rollouts."""
