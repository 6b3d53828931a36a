from deduplicator.app import main

main()
