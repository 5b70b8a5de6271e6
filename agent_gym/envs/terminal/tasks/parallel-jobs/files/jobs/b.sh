sleep 0.2; touch /app/jobs/b.done
