"""nodemap in Slurm's terms: drain and resume nodes on a check's verdict
(drain.py), a check document's hardware failures as drain reasons
(verdict.py), gres.conf and node features from a topology (config.py)."""
