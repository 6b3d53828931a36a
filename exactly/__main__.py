from exactly.main import main

main()
