"""How `trtserve run --ray` lays out replicas: counts, autoscaling, routing. No Ray import here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtserve.engine.errors import UserError


class RaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(None, ge=1)  # a fixed count; None: autoscale between min and max
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    # Ray's autoscaler keeps the average ongoing requests per replica near this; default 3/4 of the batch
    target_ongoing_requests: float | None = Field(None, gt=0)
    max_ongoing_requests: int | None = Field(None, ge=1)  # default: twice the engine's batch
    prefix_affinity: bool = True  # a frontend routes shared prefixes to one replica (router.py)
    replica_cpus: float = Field(1.0, gt=0)  # Ray CPUs each replica reserves
    upscale_delay_s: float = Field(2.0, ge=0)
    downscale_delay_s: float = Field(30.0, ge=0)
    address: str | None = None  # a Ray cluster (RAY_ADDRESS); None starts one here

    @model_validator(mode="after")
    def _counts(self) -> RaySettings:
        if self.replicas is None and self.min_replicas > self.max_replicas:
            raise UserError(
                f"--min-replicas {self.min_replicas} is above --max-replicas {self.max_replicas}; lower or raise one"
            )
        return self

    def ongoing_limits(self, batch_size: int) -> tuple[int, float]:
        """(max_ongoing_requests, target_ongoing_requests) for an engine running `batch_size` at once.
        Twice the batch lets a replica queue one batch's worth behind the running one, so it never
        idles between steps, while the rest waits in Ray where another replica can take it."""
        most = self.max_ongoing_requests or 2 * batch_size
        target = self.target_ongoing_requests or max(1.0, 0.75 * batch_size)
        return most, min(target, float(most))

    def deployment_options(self, batch_size: int, drain_timeout: float) -> dict:
        """Keyword arguments for the replica deployment's `.options()`."""
        most, target = self.ongoing_limits(batch_size)
        opts: dict = {
            "max_ongoing_requests": most,
            "ray_actor_options": {"num_cpus": self.replica_cpus},
            "graceful_shutdown_timeout_s": drain_timeout,  # in-flight requests finish, as on SIGTERM
            "health_check_period_s": 2.0,
            "health_check_timeout_s": 30.0,
        }
        if self.replicas is not None:
            opts["num_replicas"] = self.replicas
        else:
            opts["autoscaling_config"] = {
                "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas,
                "initial_replicas": max(1, self.min_replicas),
                "target_ongoing_requests": target,
                "upscale_delay_s": self.upscale_delay_s,
                "downscale_delay_s": self.downscale_delay_s,
                "metrics_interval_s": 1.0,
                "look_back_period_s": 5.0,
            }
        return opts
