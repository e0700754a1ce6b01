# tcli on Nomad with the docker driver: `nomad job run -var model_repository=s3://... tcli.nomad.hcl`.
# Credentials for a private bucket come from the Nomad Variable nomad/jobs/tcli (see the template).

variable "image" {
  type    = string
  default = "ghcr.io/example/tcli:0.1.0" # deploy/docker/Dockerfile; Dockerfile.gpu when gpus > 0
}

variable "model_repository" {
  type    = string
  default = "s3://my-bucket/model_repository"
}

variable "gpus" {
  type    = number
  default = 0 # > 0 asks the NVIDIA device plugin for that many GPUs
}

job "tcli" {
  type = "service"

  group "server" {
    count = 1

    network {
      port "http" { to = 8000 }
      port "grpc" { to = 8001 }
      port "metrics" { to = 8002 }
    }

    # Kept across updates and restarts: the bucket's local copy, so a new allocation downloads only
    # the objects that changed
    ephemeral_disk {
      sticky  = true
      migrate = true
      size    = 20000
    }

    # One allocation at a time, each healthy by its checks before the next; a version that never
    # gets healthy is rolled back
    update {
      max_parallel      = 1
      health_check      = "checks"
      min_healthy_time  = "10s"
      healthy_deadline  = "10m" # model loading counts
      progress_deadline = "15m"
      auto_revert       = true
    }

    # nomad-autoscaler: keep the mean queueing time per request near the target (microseconds).
    # Prometheus scrapes the tcli-metrics service (Consul service discovery, job label = service).
    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        evaluation_interval = "30s"
        cooldown            = "5m" # a new allocation costs a model load

        check "queue_time" {
          source = "prometheus"
          query  = "sum(rate(nv_inference_queue_duration_us{job=\"tcli-metrics\"}[1m])) / clamp_min(sum(rate(nv_inference_request_success{job=\"tcli-metrics\"}[1m])), 1e-9)"

          strategy "target-value" {
            target = 50000
          }
        }
      }
    }

    service {
      name = "tcli"
      port = "http"

      check {
        name     = "ready"
        type     = "http"
        path     = "/v2/health/ready"
        interval = "5s"
        timeout  = "2s"
      }

      check {
        name     = "live"
        type     = "http"
        path     = "/v2/health/live"
        interval = "10s"
        timeout  = "2s"

        # restart a server that stops answering, once start-up (model loading) is over
        check_restart {
          limit = 3
          grace = "10m"
        }
      }
    }

    service {
      name = "tcli-grpc"
      port = "grpc"
    }

    service {
      name = "tcli-metrics"
      port = "metrics"
      tags = ["prometheus"]
    }

    task "tcli" {
      driver = "docker"

      # SIGTERM, then the server drains for --exit-timeout-secs (30) and unloads
      kill_timeout = "45s"

      config {
        image = var.image
        ports = ["http", "grpc", "metrics"]
        # after the image's ENTRYPOINT (tcli serve): tritonserver's flags
        args = [
          "--model-repository=${var.model_repository}",
          "--model-control-mode=poll",
          "--repository-poll-secs=15",
          "--exit-timeout-secs=30",
        ]
      }

      env {
        TRITON_AWS_MOUNT_DIRECTORY   = "/alloc/data/repository/s3"
        TRITON_GCS_MOUNT_DIRECTORY   = "/alloc/data/repository/gs"
        TRITON_AZURE_MOUNT_DIRECTORY = "/alloc/data/repository/as"
      }

      # Credentials as environment variables from the job's Nomad Variable, when there is one:
      # nomad var put nomad/jobs/tcli AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=...
      template {
        destination = "secrets/cloud.env"
        env         = true
        data        = <<-EOT
          {{- if nomadVarExists "nomad/jobs/tcli" }}
          {{- range $name, $value := nomadVar "nomad/jobs/tcli" }}
          {{ $name }}={{ $value }}
          {{- end }}
          {{- end }}
        EOT
      }

      resources {
        cpu        = 1000
        memory     = 2048
        memory_max = 4096

        # only when var.gpus > 0
        dynamic "device" {
          for_each = var.gpus > 0 ? [var.gpus] : []
          labels   = ["nvidia/gpu"]

          content {
            count = device.value
          }
        }
      }
    }
  }
}
