"""The Spark audit of a flow: source against destination, record by record."""
