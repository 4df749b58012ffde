"""The peers of `scripts/compare.py`: one file per system measured, plus the report and the roofline."""
