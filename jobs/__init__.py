"""The one job lifecycle: every background action of the dashboard is a job row run here."""
