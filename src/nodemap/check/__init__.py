"""`nodemap check`: expectations (data with sources), verdict rules,
inventory, findings, and the check document of one node."""
