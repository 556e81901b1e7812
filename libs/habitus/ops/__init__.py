"""Operations as code: the Grafana dashboards (`habitus.ops.dashboards`), the Kubernetes
observability files (`habitus.ops.k8s_observability`) and how far each projection has come
(`habitus.ops.lag`, what `habitus lag` and the demo show)."""
