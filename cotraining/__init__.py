"""Online RL on dialogues: rollouts against simulators, GRPO / RLOO / PPO on the one train loop.

The core library (ilql_dialogue/) keeps the loop, the models, the sampler and
the task-agnostic dialogue engine (ilql_dialogue/environment.py, with
AirDialogue as `domains.airdialogue.environment.AirDialogueEnv`). This package adds only what online
RL needs:

  policy         the trained LM with its frozen KL reference (and PPO's value head)
  logprobs       the sampler's distribution, re-scored by the trainer
  losses         advantages (group, leave-one-out, GAE), clipped surrogate, k3 KL
  algorithms     GRPO / RLOO / PPO as the registry's Algorithms
  rollouts       G dialogues per scenario; the trained role's tokens as arrays
  experience     the loop's TrainData, sampled from the model being trained
  rollout_store  the latest rollout batches on disk, for exact resume
  launch         config.rl -> environment, opponents, learner (workflows/train.py)
  cotrain        Co-Training: the simulator trained too, on its own turns, with its own reward
  population     Population Co-Training's FIFO pool of saved simulators, one drawn per batch
  reprefill, benchmark   re-prefilling every turn, and the throughput comparison
"""
