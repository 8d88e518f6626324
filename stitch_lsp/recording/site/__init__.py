"""Put on the user's PYTHONPATH by ``stitch record``: stdlib only."""
