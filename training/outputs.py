"""The former path of :mod:`training.infra.outputs`: kept so that ``from training.outputs import
OutputExists`` (the refusal to write over another run) keeps working."""

from training.infra.outputs import (MARKER, OutputExists, claim_file, claim_folder,
                                    write_text_atomically)

__all__ = ["MARKER", "OutputExists", "claim_file", "claim_folder", "write_text_atomically"]
