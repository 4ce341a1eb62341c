"""The former path of :mod:`paw_gym.outputs`: kept so that ``from training.outputs import
OutputExists`` (the refusal to write over another run) keeps working."""

from paw_gym.outputs import (MARKER, OutputExists, claim_file, claim_folder,
                             write_text_atomically)

__all__ = ["MARKER", "OutputExists", "claim_file", "claim_folder", "write_text_atomically"]
