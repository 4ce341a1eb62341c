"""The former path of :mod:`training.infra.metrics_log`: kept so that ``from training.metrics_log
import read_metrics`` (a run's metrics, read back) keeps working."""

from training.infra.metrics_log import CURVES, MetricsLogger, read_metrics, run_folder

__all__ = ["CURVES", "MetricsLogger", "read_metrics", "run_folder"]
