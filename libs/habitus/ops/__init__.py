"""Operations as code: the Grafana dashboards (`habitus.ops.dashboards`)."""
