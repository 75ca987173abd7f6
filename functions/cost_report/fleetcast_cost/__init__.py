"""Cost watch: SageMaker cost anomalies and the savings each change could bring.

``report.run_cost_report`` is the one entry point the Lambda function and the CLI call;
``detection`` and ``recommendations`` are pure; ``sources``, ``state`` and ``delivery`` are
the only modules that call AWS. ``chart`` needs matplotlib, which only the cost-report
function ships, so nothing here imports it at package import time.
"""
