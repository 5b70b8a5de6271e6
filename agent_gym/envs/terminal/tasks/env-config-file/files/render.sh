echo "db=${DB_NAME:?} port=${DB_PORT:?} mode=${MODE:?}"
