"""Files generated from the API models and metric names: the two CRDs and the Grafana dashboard
(and the YAML style they and ``flashrl render`` share).
"""
