from replicator.app import main

main()
