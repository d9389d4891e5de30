"""Behavioural anomaly detection with scikit-learn (issue #15): features, models, model store, stream scoring.

See docs/ml.md for the design and the measured quality figures.
"""
