"""`writegate bench`: what the safety costs, measured against a naive LangGraph approval.

Every part runs against databases the bench creates for itself and drops at the end:
baseline vs writegate (`compare`), the ledger alone (`ledger`), commits and statements
counted by the driver and the server (`counts`), the confirm storm (`storm`), storage
(`storage`) and table-size independence (`scale`). `run.run_bench` runs them all and
`report` prints the tables and writes the JSON file and the chart.
"""

if __name__ != "writegate.bench":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.bench, not {__name__} (see CONTRIBUTING.md)")
