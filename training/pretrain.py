"""The former path of :mod:`training.warmstart.pretrain` (earlier READMEs show it): kept so that
``from training.pretrain import ...`` keeps working."""

from training.warmstart.pretrain import (PretrainConfig, cached_build, episode_transcripts,
                                         next_observation_accuracy, reading_probe, run_pretrain,
                                         trained_part, transcript_parts)

__all__ = ["PretrainConfig", "cached_build", "episode_transcripts", "next_observation_accuracy",
           "reading_probe", "run_pretrain", "trained_part", "transcript_parts"]
