"""Operations as code: the Grafana dashboards (`habitus.ops.dashboards`), the Kubernetes
observability files (`habitus.ops.k8s_observability`), the files that follow the services'
projections and settings (`habitus.ops.k8s_scaling`: KEDA's ScaledObjects;
`habitus.ops.k8s_streams`: the streams as NACK resources) and how far each projection has come
(`habitus.ops.lag`, what `habitus lag` and the demo show)."""
