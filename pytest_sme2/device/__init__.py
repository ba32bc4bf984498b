"""The device a number was measured on: live facts, the identity a baseline is keyed on, host load, code paths."""
