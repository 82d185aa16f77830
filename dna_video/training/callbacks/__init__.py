"""Lightning callbacks: the side jobs of a run (throughput, failed videos, predictions, reports, guards)."""
