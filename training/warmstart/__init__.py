"""Warm starts before RL: supervised fine-tuning on expert demos (:mod:`.sft`) and next-token
pretraining on recorded transcripts (:mod:`.pretrain`)."""
