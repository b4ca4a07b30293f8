"""A real Prometheus for tests: the development environment's (`staticfleet_dev.prometheus`),
shared with the demo."""

from staticfleet_dev.prometheus import (
    ALERT_RULES,
    MEMBER_PORT,
    Prometheus,
    dashboard_answers,
    legend_labels,
    scrape_config,
)

__all__ = ["ALERT_RULES", "MEMBER_PORT", "Prometheus", "dashboard_answers", "legend_labels",
           "scrape_config"]
