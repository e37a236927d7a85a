"""Studies: variants x scenarios x seeds of ordinary runs, trained on Ray Tune and
reported by the paper's protocol (``acegnn study STUDY.yaml [--report]``).

:mod:`~acegnn.study.spec` reads a study file, :mod:`~acegnn.study.trial` trains one
trial (no Ray), :mod:`~acegnn.study.runner` runs the unfinished trials on Ray Tune
(imported only there: Ray is the ``ray`` extra), :mod:`~acegnn.study.report` makes the
tables and the figure.
"""
from acegnn.study.report import study_records, write_report
from acegnn.study.spec import Study, Trial, Variant, load_study
from acegnn.study.trial import finished, train_trial

__all__ = ["Study", "Trial", "Variant", "finished", "load_study", "study_records",
           "train_trial", "write_report"]
