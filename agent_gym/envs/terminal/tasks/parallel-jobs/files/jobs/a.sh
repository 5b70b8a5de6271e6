sleep 0.3; touch /app/jobs/a.done; exit 3
